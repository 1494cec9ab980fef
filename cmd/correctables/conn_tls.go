package main

import (
	"errors"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/credentials"

	"github.com/correctables/correctables/internal/certs"
)

// The client's transport security flags, registered on the connection
// flags of conn.go:
//
//	--cacert   verify the replicas' certificates against this CA (PEM)
//	--cert     present this client certificate (mutual TLS) ...
//	--key      ... with this key
//	--insecure allow plaintext to replicas off loopback
//
// Any of --cacert, --cert or --key turns TLS on; without --cacert the
// system's roots verify the replicas. Without TLS, plaintext is refused for
// an endpoint off loopback unless --insecure is given.
func init() { connSecurityHook = registerTLSFlags }

func registerTLSFlags(fs *pflag.FlagSet) func() (connSecurity, error) {
	var cacert, cert, key string
	var insecure bool
	fs.StringVar(&cacert, "cacert", "", "verify the replicas' certificates against this CA bundle (PEM); turns TLS on")
	fs.StringVar(&cert, "cert", "", "client certificate (PEM) for mutual TLS; turns TLS on; needs --key")
	fs.StringVar(&key, "key", "", "the key of --cert (PEM)")
	fs.BoolVar(&insecure, "insecure", false, "allow plaintext to replicas that are not on loopback (a network you trust)")
	return func() (connSecurity, error) {
		return clientSecurity(cacert, cert, key, insecure)
	}
}

// clientSecurity builds the client's transport security from the flags.
func clientSecurity(cacert, cert, key string, insecure bool) (connSecurity, error) {
	tlsOn := cacert != "" || cert != "" || key != ""
	if !tlsOn {
		return connSecurity{insecure: insecure}, nil
	}
	if insecure {
		return connSecurity{}, errors.New("--insecure and TLS flags (--cacert, --cert, --key) together: choose one")
	}
	if (cert == "") != (key == "") {
		return connSecurity{}, errors.New("--cert and --key go together: a client certificate needs its key")
	}
	cfg, err := certs.ClientConfig(cacert, cert, key)
	if err != nil {
		return connSecurity{}, err
	}
	return connSecurity{creds: credentials.NewTLS(cfg)}, nil
}
