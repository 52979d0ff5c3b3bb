"""Test sets: cases, their front matter, drafts, the suite documents, the catalog of extensions."""
