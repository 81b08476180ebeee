"""The HTML page: one self-contained file per search, explanation or serving plan."""
