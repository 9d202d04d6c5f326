

def max_pool(x):
    """Each 2x2 window as two axes of a reshaped view: one max over them."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
