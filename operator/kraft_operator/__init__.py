"""kraftwerk operator."""
