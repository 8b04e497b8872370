package daemon

import (
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// outMsg is one message waiting in a session's send queue.
type outMsg struct {
	ch  transport.ChannelID
	buf *[]byte // from bufpool; the writer returns it
	// frameOff is where the frame starts in *buf for DATA messages whose
	// frame the writer must stamp and protect; -1 for everything else.
	frameOff int
	// algo indexes sessionMetrics (0 m2m, 1 tokennative); -1 for control.
	algo int8
	// closeSent, when set, is the reason of the CLOSE this message carries:
	// the writer records it in the state machine once written.
	closeSent negotiate.CloseReason
	// closeAfter makes the writer close the connection once the message is
	// written (the acknowledgement of a received CLOSE).
	closeAfter bool
}

// tailroom is the spare capacity every outgoing frame buffer carries, so the
// writer can append an HMAC tag (32 B) or AEAD nonce+tag (28 B) in place.
const tailroom = 32

func (m *outMsg) free() {
	bufpool.Put(m.buf)
	m.buf = nil
}
