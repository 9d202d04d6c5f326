"""Exercise 24, the capstone: a classifier of the student's own design for MNIST-1D (Greydanus,
"Scaling down deep learning", 2020), trained with the student's own framework (their
``mytorch/``) and then with PyTorch, judged by its accuracy on signals whose labels never reach
the student's process.

Each part calls ``fit_predict(x_train, y_train, x_eval)``: the published training set (4,000
signals of 40 samples, made here by ``edu_dl.datasets.mnist1d``, nothing downloaded) and signals to
label. The visible case labels the published test set (1,000 signals; its labels are public, and
``check()`` judges them in the student's kernel); the hidden case labels 300 signals of a new sample
drawn from the grading secret's seed, their labels ``Withheld``: they stay in the grader, which
compares outside the sandbox. The line is ``Accuracy(0.55)``: the paper's logistic regression gets
about 0.32 and its MLP about 0.68. The course's solution (two hidden layers of 128, 30 epochs of
SGD with momentum 0.9 in mini-batches of 128) got 0.623 to 0.700 on hidden samples of ten seeds
with its own mytorch (0.656 on the public test set) and 0.653 to 0.717 with PyTorch (0.676):
an honest MLP passes with room, and the lecture's softmax regression (0.31) cannot. The notebook's
budget (its metadata) bounds the whole run.

The source checks only nudge (the grade rests on the labels): the first part trains with the
student's own framework (it calls their backward or train_step), not a library's classifier,
another framework or the course's engine; the second with PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.datasets import mnist1d
from edu_dl.grading import Accuracy, Part, Withheld
from edu_dl.grading.authoring.source import names_check

LINE = 0.55
HIDDEN_SIGNALS = 600  # a fresh sample of this many, half of it (its training split) labelled
READY_MADE = (("sklearn", "LogisticRegression", "MLPClassifier", "SVC", "KNeighborsClassifier",
               "RandomForestClassifier", "GradientBoostingClassifier"),
              "this part asks for a network you train yourself, not a library's ready-made "
              "classifier")
TRAINED = (("backward",), "the function never calls backward(): train the network by gradient "
                          "descent, its gradients from the engine's backward pass")
OWN_TRAINED = (("backward", "train_step"),
               "the function calls neither your backward nor your train_step: train the network "
               "by gradient descent with your own framework")


def _cases(rng: np.random.Generator, hidden: bool) -> list[tuple[Any, ...]]:
    """(x_train, y_train, x_eval, y_eval withheld): the published training set, and to label the
    published test set (visible) or a new sample from the grading secret's seed (hidden).
    ``mnist1d.make`` makes each set once per process and hands every call arrays of its own."""
    train, test = mnist1d.make()
    if hidden:
        test, _ = mnist1d.make(seed=int(rng.integers(2**31)), num_samples=HIDDEN_SIGNALS,
                               train_split=0.5)
    return [(train.x, train.y, test.x, Withheld(test.y))]


def _labels(x_train: Any, y_train: Any, x_eval: Any, y_eval: Any) -> Any:
    return y_eval


ENGINE_SOURCE = names_check(
    required=[OWN_TRAINED],
    forbidden=[READY_MADE,
               (("torch", "tf", "tensorflow", "keras", "jax", "jnp", "edu_dl", "Tensor"),
                "this part trains with your own framework (mytorch); PyTorch is the next "
                "part's, and the course's engine is not yours")])
TORCH_SOURCE = names_check(
    required=[(("torch",), "this part trains with PyTorch: build the network from "
                           "torch.nn and train it with torch.optim"), TRAINED],
    forbidden=[READY_MADE])

PARTS = [
    Part(id="ex24.classify", points=4, cases=_cases, expected=_labels,
         compare=Accuracy(LINE), arg_names=("x_train", "y_train", "x_eval"), timeout_s=120,
         source_check=ENGINE_SOURCE),
    Part(id="ex24.classify_torch", points=2, cases=_cases, expected=_labels,
         compare=Accuracy(LINE), arg_names=("x_train", "y_train", "x_eval"), timeout_s=120,
         source_check=TORCH_SOURCE),
]
