"""Tables (rich, markdown) and plots (matplotlib) over stage artifacts."""
