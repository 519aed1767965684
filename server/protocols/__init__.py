"""The wire protocols: each decodes its JSON into the canonical request and encodes canonical
events (or their folded answer) back, errors included. Neither knows the other exists."""
