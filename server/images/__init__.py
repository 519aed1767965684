"""Images in requests: fetched through the egress guard (URLs) or taken inline (base64), then
decoded and normalized for the runtime."""
