"""mpiplat: installer and conformance suite for MPI training on Kubernetes."""
