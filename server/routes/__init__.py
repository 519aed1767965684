"""HTTP routes, one module per resource; `infer` holds the flow both protocols share."""
