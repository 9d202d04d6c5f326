"""The models every framework trains: shapes, losses, optimizer formulas and seeded starting points.

- ``spec``: the two-layer net and the digits classifier, their losses and update rules
"""
