package sim

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/replica"
)

// encodeMessage turns a replica message into bytes, as a real transport
// would, so that simulated replicas share no memory.
func encodeMessage(m replica.Message) ([]byte, error) {
	b := []byte{byte(m.Type)}
	b = binary.AppendUvarint(b, m.From)
	b = binary.AppendUvarint(b, m.To)
	b = binary.AppendUvarint(b, m.Clock)
	b = binary.AppendUvarint(b, uint64(len(m.VV)))
	for o, s := range m.VV {
		b = binary.AppendUvarint(b, o)
		b = binary.AppendUvarint(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Ops)))
	for _, q := range m.Ops {
		b = replica.AppendReq(b, q)
	}
	if m.Raft != nil {
		rb, err := proto.Marshal(m.Raft)
		if err != nil {
			return nil, fmt.Errorf("sim: encode raft message: %w", err)
		}
		b = append(b, rb...)
	}
	return b, nil
}

func decodeMessage(b []byte) (replica.Message, error) {
	m := replica.Message{Type: replica.MsgType(b[0])}
	b = b[1:]
	next := func() uint64 {
		v, n := binary.Uvarint(b)
		b = b[n:]
		return v
	}
	m.From, m.To, m.Clock = next(), next(), next()
	if n := next(); n > 0 {
		m.VV = replica.VV{}
		for i := uint64(0); i < n; i++ {
			o := next()
			m.VV[o] = next()
		}
	}
	for n := next(); n > 0; n-- {
		q, rest, err := replica.DecodeReq(b)
		if err != nil {
			return m, err
		}
		m.Ops = append(m.Ops, q)
		b = rest
	}
	if m.Type == replica.MsgRaft {
		m.Raft = &raftpb.Message{}
		if err := proto.Unmarshal(b, m.Raft); err != nil {
			return m, fmt.Errorf("sim: decode raft message: %w", err)
		}
	}
	return m, nil
}
