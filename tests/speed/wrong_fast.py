import numpy as np


def standardize(images):
    """Fast, and wrong: the shape is right, the values are not."""
    return np.zeros((images.shape[0], images.shape[3], images.shape[1], images.shape[2]),
                    dtype=np.float32)
