package state

// queue is a FIFO ring buffer. Push/pop at both ends are amortized O(1): the
// back for enqueue and its revert, the front for dequeue and its revert. The
// sequence number of an item is implied by its position: the last item has
// next-1, the head has next-n.
type queue struct {
	buf  [][]byte // len(buf) is 0 or a power of two
	head int      // index in buf of the first item
	n    int      // number of items
	next uint64   // sequence number the next enqueued item gets; starts at 1
}

const minQueueCap = 8

func newQueue() *queue { return &queue{next: 1} }

func (q *queue) headSeq() uint64 { return q.next - uint64(q.n) }

func (q *queue) at(i int) []byte { return q.buf[(q.head+i)&(len(q.buf)-1)] }

// resize copies the items into a buffer of capacity c (a power of two >= n).
func (q *queue) resize(c int) {
	nb := make([][]byte, c)
	for i := 0; i < q.n; i++ {
		nb[i] = q.at(i)
	}
	q.buf, q.head = nb, 0
}

func (q *queue) grow() {
	if q.n == len(q.buf) {
		q.resize(max(minQueueCap, 2*len(q.buf)))
	}
}

// shrink halves the buffer when it is at most a quarter full, so memory
// follows the queue length without thrashing at a boundary.
func (q *queue) shrink() {
	if len(q.buf) > minQueueCap && q.n <= len(q.buf)/4 {
		q.resize(len(q.buf) / 2)
	}
}

func (q *queue) pushBack(v []byte) {
	q.grow()
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
	q.next++
}

func (q *queue) popBack() []byte {
	i := (q.head + q.n - 1) & (len(q.buf) - 1)
	v := q.buf[i]
	q.buf[i] = nil
	q.n--
	q.next--
	q.shrink()
	return v
}

// popFront removes the head; the caller has checked n > 0.
func (q *queue) popFront() []byte {
	v := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	q.shrink()
	return v
}

// pushFront puts back an item popFront took; next is unchanged.
func (q *queue) pushFront(v []byte) {
	q.grow()
	q.head = (q.head - 1) & (len(q.buf) - 1)
	q.buf[q.head] = v
	q.n++
}

func (q *queue) clone() *queue {
	c := &queue{next: q.next, n: q.n}
	if q.n > 0 {
		c.buf = make([][]byte, len(q.buf))
		for i := 0; i < q.n; i++ {
			c.buf[i] = q.at(i)
		}
	}
	return c
}
