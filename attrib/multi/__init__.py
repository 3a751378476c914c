"""Several analyses at once: compare (two sides, with ledger_diff, provenance_diff, outputs and
the speculative rows), ladder (a campaign of compared steps), slope (over contexts), trend (over
time, with host_check) and the sweep table. Each reads typed `Analysis` records (a trace analysed
now, or a saved document `Analysis.load` read back) and returns a typed result or document that
attrib.report renders."""
