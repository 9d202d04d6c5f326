"""Your framework's convolution (exercise 11): im2col with a dilated kernel, the forward and
backward passes of a convolution in TensorFlow's NHWC layout, and ``Conv2d``, the layer that
records them on your tape as one op. Write the bodies that raise NotImplementedError; exercise 11
checks them, and the capstone (exercise 24) may use the layer.
"""

import numpy as np

from mytorch.nn import Module


def im2col_dilated(x, kh, kw, stride=1, pad=0, dilation=1):
    """Every window of a batch of NCHW images as a column, with a dilated kernel.

    Inputs:
    - x: images, shape (N, C, H, W)
    - kh, kw: the kernel's height and width (its number of taps down and across)
    - stride: the step between two windows; pad: zeros added on each side of H and W
    - dilation: the step between two taps: tap (p, q) of the window at output position (i, j)
      reads x_pad[n, c, i*stride + p*dilation, j*stride + q*dilation]

    Returns X_col, shape (C*kh*kw, N*OH*OW), in lecture 11's layout: column (n*OH + i)*OW + j
    is window (i, j) of image n, row (c*kh + p)*kw + q its tap (c, p, q). OH and OW count the
    windows that fit in the padded image.

    Example: x = np.arange(16.0).reshape(1, 1, 4, 4), kh = kw = 2, dilation 2: each window
    reads the corners of a 3x3 square, 2 windows fit each way, X_col has shape (4, 4) and its
    first column is [0, 2, 8, 10].
    """
    ### BEGIN SOLUTION
    N, C = x.shape[:2]
    span_h, span_w = dilation * (kh - 1) + 1, dilation * (kw - 1) + 1  # rows, columns a window covers
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    spans = np.lib.stride_tricks.sliding_window_view(x_pad, (span_h, span_w), axis=(2, 3))
    taps = spans[:, :, ::stride, ::stride, ::dilation, ::dilation]  # (N, C, OH, OW, kh, kw)
    return taps.transpose(1, 4, 5, 0, 2, 3).reshape(C * kh * kw, -1)
    ### END SOLUTION


def conv_forward_nhwc(x, w, b, stride=1, pad=0, dilation=1):
    """A convolution layer in TensorFlow's layout, through your im2col_dilated.

    Inputs:
    - x: images, NHWC, shape (N, H, W, C)
    - w: filters, HWIO, shape (kh, kw, C, O): w[p, q, c, o] is tap (p, q) of channel c in
      filter o
    - b: biases, shape (O,)
    - stride, pad, dilation: as in im2col_dilated

    Returns z, NHWC, shape (N, OH, OW, O):
    z[n, i, j, o] = b[o] + the sum over (p, q, c) of w[p, q, c, o] times tap (c, p, q) of
    image n's window (i, j), the taps as in im2col_dilated.

    Example: x of shape (2, 5, 4, 3), w of shape (3, 3, 3, 4), pad 1: z has shape (2, 5, 4, 4).
    """
    ### BEGIN SOLUTION
    N, H, W, C = x.shape
    kh, kw, _, O = w.shape
    X_col = im2col_dilated(x.transpose(0, 3, 1, 2), kh, kw, stride, pad, dilation)
    W_taps = w.transpose(2, 0, 1, 3).reshape(C * kh * kw, O)  # rows in X_col's (c, p, q) order
    OH = (H + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    return (X_col.T @ W_taps + b).reshape(N, OH, OW, O)
    ### END SOLUTION


def conv_backward_nhwc(dout, x, w, stride=1, pad=0, dilation=1):
    """The gradients of conv_forward_nhwc.

    Inputs:
    - dout: upstream gradient dL/dz, shape (N, OH, OW, O)
    - x, w, stride, pad, dilation: what conv_forward_nhwc was called with

    Returns a tuple (dx, dw, db) with the shapes of x (N, H, W, C), w (kh, kw, C, O) and b (O,).

    Example: for x of shape (2, 5, 4, 3), w of shape (3, 3, 3, 4), pad 1, dout has shape
    (2, 5, 4, 4) and dx, dw, db have shapes (2, 5, 4, 3), (3, 3, 3, 4), (4,).
    """
    ### BEGIN SOLUTION
    N, H, W, C = x.shape
    kh, kw, _, O = w.shape
    OH, OW = dout.shape[1:3]
    G = dout.reshape(N * OH * OW, O)  # rows (n, i, j), as X_col's columns
    X_col = im2col_dilated(x.transpose(0, 3, 1, 2), kh, kw, stride, pad, dilation)
    dw = (X_col @ G).reshape(C, kh, kw, O).transpose(1, 2, 0, 3)
    db = G.sum(axis=0)
    W_taps = w.transpose(2, 0, 1, 3).reshape(C * kh * kw, O)
    d_taps = (G @ W_taps.T).reshape(N, OH, OW, C, kh, kw)
    # col2im in NHWC: every tap's gradient goes back to the pixel it read, added (windows overlap)
    dx_pad = np.zeros((N, H + 2 * pad, W + 2 * pad, C))
    for p, q in np.ndindex(kh, kw):
        rows = slice(p * dilation, p * dilation + stride * OH, stride)
        cols = slice(q * dilation, q * dilation + stride * OW, stride)
        dx_pad[:, rows, cols] += d_taps[..., p, q]
    return dx_pad[:, pad : pad + H, pad : pad + W], dw, db
    ### END SOLUTION


class Conv2d(Module):
    """A convolution layer on your tape, NHWC images and HWIO filters (TensorFlow's layouts).

    weight has shape (k, k, c_in, c_out), bias (c_out,), both drawn uniformly from
    [-1/sqrt(c_in k k), 1/sqrt(c_in k k)] by ``rng``, as torch.nn.Conv2d draws them; stride,
    pad and dilation as in conv_forward_nhwc.
    """

    def __init__(self, c_in, c_out, k, rng, stride=1, pad=0, dilation=1):
        super().__init__()
        bound = 1.0 / np.sqrt(c_in * k * k)
        self.weight = rng.uniform(-bound, bound, (k, k, c_in, c_out))
        self.bias = rng.uniform(-bound, bound, c_out)
        self.stride, self.pad, self.dilation = stride, pad, dilation

    def parameters(self):
        return [self.weight, self.bias]

    def __call__(self, tape, x):
        """Record the convolution of x (the id of an (N, H, W, c_in) value) on ``tape`` as
        **one** op whose inputs are x, the weight and the bias, and whose vjp is your
        conv_backward_nhwc; the parameters' ids go in ``self.ids`` (weight first). Returns the
        id of the (N, OH, OW, c_out) result."""
        ### BEGIN SOLUTION
        weight, bias = tape.input(self.weight), tape.input(self.bias)
        self.ids = [weight, bias]
        image, filters = tape.values[x], tape.values[weight]
        settings = (self.stride, self.pad, self.dilation)
        out = conv_forward_nhwc(image, filters, tape.values[bias], *settings)
        return tape.record(out, (x, weight, bias),
                           lambda dout: conv_backward_nhwc(dout, image, filters, *settings))
        ### END SOLUTION
