"""Tiny models of each family the node serves, made by the tests: the family's architecture at a
toy size with random weights, the embedded model's vocabulary with the family's own tokens added,
and the family's chat template written from its documented format (`<family>.jinja` here)."""
