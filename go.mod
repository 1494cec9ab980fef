module github.com/correctables/correctables

go 1.26.0

require github.com/spf13/cobra v1.10.2

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.etcd.io/raft/v3 v3.7.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
