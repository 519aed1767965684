"""The B3IQ gateway route of chat completions: models this node does not serve, answered
upstream."""
