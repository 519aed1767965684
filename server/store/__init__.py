"""Where keys and metering records are kept."""
