"""The local reference cluster: real control plane, KWOK nodes, host-run upstream controllers."""
