"""The driver side of the parity harness, one module per concern: the scenarios each concern
runs, the manifests or command lines kvpilot judges them as, and the comparison of the two
verdicts. The release side (the scripts beside this package) runs each release's own code."""
