package cudaext

import "unsafe"

// gatherParams mirrors fg::GatherParams (kernels/gemm.cuh) field by field;
// every field is 8 bytes, so the layouts agree. TestParamsMirrorCpp checks
// the names and order.
type gatherParams struct {
	X, W, Bias, Y, Part          uint64
	Tbl, Order, TileSeg, TileTap uint64
	TileSched                    uint64
	M, N, Kc, V                  int64
	Splits                       int64
	Vec                          int64
	WT                           int64
	Mirror                       int64
	SplitCtr                     uint64
	SlotTbl                      int64
}

// pairsParams mirrors fg::PairsParams (kernels/gemm.cuh).
type pairsParams struct {
	A, B, Out, Part uint64
	IA, IB, Seg     uint64
	M, N, V, K      int64
	Splits          int64
	Vec             int64
	Chunk           int64
	Mirror          int64
	Off             uint64
	Nc, OffRows     int64
	BiasPart        uint64
	OrderGroups     int64
	Tickets         uint64
}

func (p *gatherParams) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

func (p *pairsParams) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

// streamKArgs mirrors fg::StreamK (kernels/gather_ws.cuh): the buffers of
// a stream-K gather launch (the kernels.StreamKName kernels).
type streamKArgs struct {
	Slots uint64 // [blocks][BM·BN] float32
	Flags uint64 // [blocks][consumer warps] uint32, zero at the launch
}

func (a *streamKArgs) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
}

// wsMaps mirrors fg::WsMaps (kernels/gather_ws.cuh): the TMA descriptor of
// the weight of a warp-specialised gather, 128 opaque bytes.
type wsMaps struct {
	W [16]uint64
}

func (m *wsMaps) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(m)), unsafe.Sizeof(*m))
}
