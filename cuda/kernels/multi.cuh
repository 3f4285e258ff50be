// multi.cuh: the one-pass kernels of the same-GPU path: read up to GK_MULTI_MAX input
// buffers, reduce them element by element, and write the result to up to GK_MULTI_MAX
// output buffers, in one grid-stride pass over memory (each input read once, each
// output written once). Like reduce.cuh, written once for nvcc (reduce.cu) and for the
// fake driver's host build (tests/fakecuda/kernels_host.cc).
//
// The result is the two-operand kernels' chain, bit for bit: acc = in[0], then
// acc = acc op in[p] for p = 1 .. nin-1 in order, each step rounded in the element type
// (reduce.cuh's Elem<T>::reduce), then for avg acc = acc / div (Elem<T>::divide), so the
// same-GPU path gives the bytes internal/reduce and core's host all_reduce give.
//
// An output may be one of the inputs (in place) but must not partially overlap any
// input or another output: every thread reads all inputs of its elements before it
// writes any output of them, and no thread reads another's elements.
#ifndef GONCCL_MULTI_CUH_
#define GONCCL_MULTI_CUH_

#include "reduce.cuh"

// GK_MULTI_MAX is how many inputs, and how many outputs, one launch takes.
#define GK_MULTI_MAX 8

// GK_ROLLED keeps a loop over the buffers a loop: nvcc would otherwise unroll it
// several times over, for a fatbin several times larger and no fewer memory
// transactions. GK_PACK_UNROLL unrolls a loop over a pack's elements on the device, so
// that the pack stays in registers; the host build (the fake driver's, which only has
// to give the same bytes) leaves it rolled, which halves gcc's time on these kernels.
#ifdef __CUDACC__
#define GK_ROLLED _Pragma("unroll 1")
#define GK_PACK_UNROLL _Pragma("unroll")
#else
#define GK_ROLLED
#define GK_PACK_UNROLL
#endif

namespace gk {

// MultiArgs is the one kernel parameter, passed by value (cuda/kernels.go lays out the
// same struct): in[0..nin) are read, out[0..nout) written, count elements each; avg
// kernels divide by div. abort is the launch's abort word (reduce.cuh's aborted), or
// null: once it is set the kernel touches no buffer.
struct MultiArgs {
  const void* in[GK_MULTI_MAX];
  void* out[GK_MULTI_MAX];
  unsigned long long count;
  int nin, nout;
  long long div;
  const unsigned* abort;
};

// multi_head returns how many leading elements go alone before every buffer reaches a
// 16-byte boundary, or count if they never do together (they must all sit at the same
// offset modulo 16, and that offset must be a whole number of elements).
template <class T> GK_FN uint64_t multi_head(const MultiArgs& a, uint64_t count) {
  uintptr_t mis = (uintptr_t)a.in[0] & 15;
  bool same = true;
  GK_ROLLED
  for (int p = 1; p < a.nin; p++) same = same && ((uintptr_t)a.in[p] & 15) == mis;
  GK_ROLLED
  for (int p = 0; p < a.nout; p++) same = same && ((uintptr_t)a.out[p] & 15) == mis;
  uintptr_t gap = (16 - mis) & 15;
  if (Pack<T>::n == 1 || !same || gap % sizeof(T) != 0) return count;
  uint64_t head = gap / sizeof(T);
  return head < count ? head : count;
}

// multi_one reduces element i of every input and writes it to every output.
template <class T, int OP, bool AVG> GK_FN void multi_one(const MultiArgs& a, uint64_t i) {
  T acc = ((const T*)a.in[0])[i];
  GK_ROLLED
  for (int p = 1; p < a.nin; p++) acc = Elem<T>::template reduce<OP>(acc, ((const T*)a.in[p])[i]);
  if constexpr (AVG) acc = Elem<T>::divide(acc, a.div);
  GK_ROLLED
  for (int p = 0; p < a.nout; p++) ((T*)a.out[p])[i] = acc;
}

// multi_loop is thread tid's share of a launch of nthreads threads: elements tid,
// tid+nthreads, ... one at a time up to the common 16-byte boundary, then whole 16-byte
// packs (one vector load per input, one vector store per output), then the tail. The
// loops over the buffers stay loops (the device reads the pointers from the parameter
// bank by index, with no copy to local memory); the loops over a pack's elements are
// unrolled, so a pack stays in registers.
template <class T, int OP, bool AVG>
GK_FN void multi_loop(const MultiArgs& a, uint64_t tid, uint64_t nthreads) {
  constexpr int V = Pack<T>::n;
  uint64_t count = a.count;
  uint64_t head = multi_head<T>(a, count);
  for (uint64_t i = tid; i < head; i += nthreads) multi_one<T, OP, AVG>(a, i);
  uint64_t npacks = (count - head) / V;
  for (uint64_t k = tid; k < npacks; k += nthreads) {
    uint64_t i = head + k * V;
    Pack<T> acc = load_pack(((const T*)a.in[0]) + i);
    GK_ROLLED
    for (int p = 1; p < a.nin; p++) {
      Pack<T> b = load_pack(((const T*)a.in[p]) + i);
      GK_PACK_UNROLL
      for (int j = 0; j < V; j++) acc.e[j] = Elem<T>::template reduce<OP>(acc.e[j], b.e[j]);
    }
    if constexpr (AVG) {
      GK_PACK_UNROLL
      for (int j = 0; j < V; j++) acc.e[j] = Elem<T>::divide(acc.e[j], a.div);
    }
    GK_ROLLED
    for (int p = 0; p < a.nout; p++) store_pack(((T*)a.out[p]) + i, acc);
  }
  for (uint64_t i = head + npacks * V + tid; i < count; i += nthreads) multi_one<T, OP, AVG>(a, i);
}

}  // namespace gk

// The kernels: gonccl_multi_<op>_<dtype> for every reduce kernel of reduce.cuh's table
// (GK_REDUCE_KERNELS), and gonccl_multi_avg_<dtype>, the sum then the division by div,
// for every type that averages (GK_DIVIDE_KERNELS). reduce.cu and kernels_host.cc
// instantiate them from those tables; cuda/kernel_names.go names the same kernels.

#endif
