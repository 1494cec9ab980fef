# A replica image with nothing in it but the binary.
#
# The binary is built on the host, statically (no libc, so it runs FROM
# scratch), and copied in:
#
#   CGO_ENABLED=0 go build -o bin/correctables ./cmd/correctables
#   docker build -t correctables .
#
# Run one replica per host (deploy/compose.yaml runs three):
#
#   docker run -v correctables-data:/data -v /etc/correctables/certs:/certs:ro \
#       -p 7101:7101 correctables \
#       serve --id 1 --listen 0.0.0.0:7101 --data /data --certs-dir /certs \
#       --peers 1=host1:7101,2=host2:7101,3=host3:7101
#
# /certs holds ca.crt and this replica's replica.<id>.crt and .key (made by
# `correctables cert`; the key readable by uid 65532). Nothing at run time
# needs a file the image lacks: no /etc/passwd (the user is numeric), no
# system CA certificates (replicas verify each other and are verified by
# clients against the cluster's own CA, given by --certs-dir), no /tmp (the
# server and Pebble write only under --data, the /data volume). There is no shell, so every
# instruction that runs something is in exec form.
FROM scratch

COPY bin/correctables /correctables

# A scratch image has no mkdir or chown: copy in a directory already owned by
# the user, so that a new named volume mounted at /data (which takes the
# ownership of the image's /data) is writable by it. A bind-mounted host
# directory must be writable by uid 65532, or run with --user.
COPY --chown=65532:65532 deploy/rootfs/data /data
USER 65532:65532
VOLUME ["/data"]

# Clients and peers share one port (serve --listen).
EXPOSE 7101

# Go's runtime is PID 1 here: serve stops cleanly on SIGTERM (docker stop).
ENTRYPOINT ["/correctables"]
CMD ["serve", "--help"]
