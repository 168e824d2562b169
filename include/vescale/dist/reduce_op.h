// The reduction of a collective or of a Partial placement. Apart from process_group.h so that
// code which only names one (placements, plans, their fuzzer) needs no ATen headers.
#pragma once

namespace vescale::dist {

enum class ReduceOp { Sum, Avg, Max, Min, Product };

inline const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Product:
      return "product";
  }
  return "?";
}

}  // namespace vescale::dist
