// Boxes of global tensors: a part of a tensor that a rank holds as a plain tensor, and how a flat
// slice of a tensor (ZeRO's) is cut into such boxes. Checkpoints save and load them
// (checkpoint::Piece); optimizers hand their sharded state over as them.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace vescale::dtensor {

// A box of a global tensor that this rank holds as a plain tensor `local` (the box's shape):
// state that is not a DTensor, such as ZeRO's flat optimizer slices cut into boxes of the
// parameters' shapes. On save each box must be given by one rank only; on load `local` is
// filled in place from whatever chunks overlap it, so pieces and DTensors reshard into each other.
struct TensorBox {
  std::string name;
  at::Tensor local;
  std::vector<int64_t> global_shape, offsets;
};

// The boxes that the row-major flat range [begin, end) of a tensor of `shape` is made of, in
// order (at most 2 x ndim - 1). Each box's elements are contiguous in that order, starting at
// flat_begin: how a flat slice of a tensor (ZeRO) becomes pieces of it.
struct FlatBox {
  std::vector<int64_t> offsets, shape;
  int64_t flat_begin = 0;
};
std::vector<FlatBox> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin,
                                      int64_t end);

}  // namespace vescale::dtensor
