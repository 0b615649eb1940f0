package turnkeeper

// Version is this client's release, the same for the server and every client. It is stamped from
// the repository's VERSION file by `make generate`; `make test` fails when it drifts.
const Version = "0.1.0"
