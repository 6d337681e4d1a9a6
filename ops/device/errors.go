package device

import "errors"

// Sentinel errors. Functions wrap them with %w and a message naming the
// offending value.
var (
	// ErrNoGPU reports that no GPU can be used: the program was built
	// without the cudaext tag, or the CUDA driver or device is missing.
	ErrNoGPU = errors.New("device: no GPU")
	// ErrOutOfMemory reports a device allocation that failed; the message
	// names the request and the memory in use.
	ErrOutOfMemory = errors.New("device: out of device memory")
	// ErrNotDevice reports a value that should be a device tensor but is
	// not (a host tensor, a view of a device tensor, another type).
	ErrNotDevice = errors.New("device: not a device tensor")
	// ErrMixed reports operands on different devices, or host and device
	// operands mixed in one operation.
	ErrMixed = errors.New("device: operands on different devices")
	// ErrReleased reports a device tensor whose memory was released (by
	// Free or at the end of the step that allocated it).
	ErrReleased = errors.New("device: tensor memory released")
	// ErrStep reports misuse of steps: beginning one while another is
	// open, or ending one twice.
	ErrStep = errors.New("device: step misuse")
	// ErrClosed reports use of a closed device.
	ErrClosed = errors.New("device: closed")
	// ErrHandles reports exhaustion of the address range that identifies
	// device tensors.
	ErrHandles = errors.New("device: tensor handles exhausted")
	// ErrUnsupported reports an operation the device path does not
	// provide, such as a Gorgonia built-in that reads tensor data on the
	// host.
	ErrUnsupported = errors.New("device: unsupported on the device")
)
