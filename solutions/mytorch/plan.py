"""Your framework's static plan (exercise 12): the nodes a Session must run for its fetches, and
the schedule that runs them, each after its inputs, with your topological order (graph.py,
exercise 07). Write the bodies that raise NotImplementedError; exercise 12 checks them.
"""

import numpy as np

from mytorch.graph import topological_order


def plan(parents, fetches):
    """The nodes a Session must run to compute the fetches.

    parents: int array (n_nodes, P), row i the inputs of node i padded with -1; fetches: node
    indices. Returns the indices needed, in any order and container. E.g. parents =
    [[-1, -1], [0, -1], [-1, -1], [1, 2]], fetches = [1] -> {0, 1}.
    """
    ### BEGIN SOLUTION
    needed = set()
    stack = [int(f) for f in fetches]
    while stack:  # iterative: an unrolled graph can be deeper than Python's recursion limit
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack.extend(int(p) for p in parents[node] if p >= 0)
    return sorted(needed)
    ### END SOLUTION


def schedule(parents, fetches):
    """The order in which a Session runs its plan: every node the fetches need (your plan),
    each after all of its inputs (your topological_order, on the edges among those nodes).

    parents: int array (n_nodes, P), row i the inputs of node i padded with -1; fetches: node
    indices. Returns an int array holding each needed node once, in an order in which it can be
    evaluated. E.g. parents = [[-1, -1], [0, -1], [-1, -1], [1, 2]], fetches = [3] ->
    [0, 2, 1, 3] or [2, 0, 1, 3] (any valid order counts).
    """
    ### BEGIN SOLUTION
    needed = np.array(sorted(int(node) for node in plan(parents, fetches)), dtype=np.int64)
    position = {int(node): k for k, node in enumerate(needed)}
    edges = np.array([(position[int(p)], position[int(node)]) for node in needed
                      for p in parents[node] if p >= 0], dtype=np.int64).reshape(-1, 2)
    return needed[topological_order(len(needed), edges)]
    ### END SOLUTION
