"""Known pathologies: one pure function per rule over an analysis, returning findings."""
