package client

import (
	"context"

	"github.com/correctables/correctables/correctable"
)

// Typed helpers: each builds the Op of the same name and invokes it at the
// given levels (none: both, a preliminary and a final view), as Invoke does.

// Get reads key. See the package function Get.
func (c *Client) Get(ctx context.Context, key string, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Get(key), levels...)
}

// Put writes value at key. See the package function Put.
func (c *Client) Put(ctx context.Context, key string, value []byte, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Put(key, value), levels...)
}

// Delete removes key. See the package function Delete.
func (c *Client) Delete(ctx context.Context, key string, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Delete(key), levels...)
}

// CAS writes value at key if it holds expected. See the package function
// CAS.
func (c *Client) CAS(ctx context.Context, key string, expected, value []byte, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, CAS(key, expected, value), levels...)
}

// CASAbsent writes value at key if it does not exist. See the package
// function CASAbsent.
func (c *Client) CASAbsent(ctx context.Context, key string, value []byte, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, CASAbsent(key, value), levels...)
}

// Incr adds delta to the integer at key. See the package function Incr.
func (c *Client) Incr(ctx context.Context, key string, delta int64, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Incr(key, delta), levels...)
}

// Append appends value to the value at key. See the package function
// Append.
func (c *Client) Append(ctx context.Context, key string, value []byte, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Append(key, value), levels...)
}

// Scan reads up to limit keys with prefix. See the package function Scan.
func (c *Client) Scan(ctx context.Context, prefix string, limit int, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Scan(prefix, limit), levels...)
}

// Enqueue appends item to queue. See the package function Enqueue.
func (c *Client) Enqueue(ctx context.Context, queue string, item []byte, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Enqueue(queue, item), levels...)
}

// Dequeue takes the head of queue. See the package function Dequeue.
func (c *Client) Dequeue(ctx context.Context, queue string, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Dequeue(queue), levels...)
}

// Txn applies then if every guard holds, else els. See the package function
// Txn.
func (c *Client) Txn(ctx context.Context, guards []Guard, then, els []Write, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Txn(guards, then, els), levels...)
}

// Noop takes a place in the order; strongly, it commits the weak operations
// before it. See the package function Noop.
func (c *Client) Noop(ctx context.Context, levels ...correctable.Level) *correctable.Correctable[Result] {
	return c.Invoke(ctx, Noop(), levels...)
}
