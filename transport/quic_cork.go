package transport

// Cork and Uncork cost nothing on QUIC: a Send hands quic-go a copy of the
// message and returns without a system call (small writes are copied into
// a pending STREAM frame), and quic-go's send loop packs the frames of
// every stream into full packets, which it sends with GSO (one sendmsg per
// train of packets) where the kernel supports it. The batch is formed
// there already.

// Cork is a no-op on QUIC.
func (c *quicConn) Cork() {}

// Uncork is a no-op on QUIC.
func (c *quicConn) Uncork() error { return nil }
