"""`mpiplat dashboard`: the MPIJobs section of a web console (job list, create, details with live logs, queues,
conformance reports), served by Starlette with server-rendered pages, htmx and PatternFly's CSS.

It talks to the cluster only through the SDK (mpiplat.sdk.AsyncClient), as the kubeconfig's user (a laptop) or,
behind an identity-passing proxy, as each request's user through Kubernetes impersonation (mpiplat.dashboard.app).
"""
