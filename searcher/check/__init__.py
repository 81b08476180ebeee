"""fitplan check: read a user\x27s training config, map it to the knobs, write the edits that make it fit."""
