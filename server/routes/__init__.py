"""HTTP routes, one module per resource; `infer` holds the flow every protocol shares."""
