"""Views of trees: terminal rendering and the live view of a running search."""
