// mm, bmm, addmm, baddbmm as einsums. For each mesh dim independently, the candidates are:
// shard one output letter in every input that has it, shard a contracted letter (the output
// becomes Partial), pass one Partial input through (matmul is linear), or replicate. The
// cheapest candidate by bytes moved wins; Replicate->Shard is a free local slice.
#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

struct Candidate {
  std::vector<Placement> inputs;
  Placement output;
};

// `eq` like "mk,kn->mn"; `operands` index OpCall::specs; `bias` (or -1) is added to the output
// with broadcasting (addmm's self).
Strategy einsum(const OpCall& call, const std::string& eq, const std::vector<int64_t>& operands,
                int64_t bias) {
  const auto arrow = eq.find("->");
  std::vector<std::string> ins;
  for (size_t b = 0, e; b < arrow; b = e + 1) {
    e = eq.find(',', b);
    if (e == std::string::npos || e > arrow) e = arrow;
    ins.push_back(eq.substr(b, e - b));
  }
  const std::string out = eq.substr(arrow + 2);
  const int64_t nm = call.mesh_ndim();
  const auto& specs = call.specs;

  Strategy st;
  st.inputs.assign(specs.size(), replicate_all(nm));
  Placements out_p(nm, Placement::replicate());
  for (int64_t m = 0; m < nm; ++m) {
    std::vector<Candidate> cands;
    std::string letters;
    for (auto& s : ins)
      for (char c : s)
        if (letters.find(c) == std::string::npos) letters += c;
    for (char c : letters) {  // shard a letter
      Candidate cd;
      for (auto& s : ins) {
        auto pos = s.find(c);
        cd.inputs.push_back(pos == std::string::npos ? Placement::replicate()
                                                     : Placement::shard(pos));
      }
      auto opos = out.find(c);
      cd.output = opos == std::string::npos ? Placement::partial() : Placement::shard(opos);
      cands.push_back(cd);
    }
    for (size_t i = 0; i < ins.size(); ++i) {  // one Partial input passes through
      Candidate cd;
      cd.inputs.assign(ins.size(), Placement::replicate());
      cd.inputs[i] = Placement::partial();
      cd.output = Placement::partial();
      cands.push_back(cd);
    }
    cands.push_back(
        {std::vector<Placement>(ins.size(), Placement::replicate()), Placement::replicate()});

    double best = 1e300;
    const Candidate* pick = nullptr;
    for (auto& cd : cands) {
      double cost = 0;
      for (size_t i = 0; i < ins.size(); ++i) {
        const auto& s = specs[operands[i]];
        cost += rules::redistribute_cost(s, s.placements[m], cd.inputs[i]);
      }
      if (cost < best) best = cost, pick = &cd;
    }
    for (size_t i = 0; i < ins.size(); ++i) st.inputs[operands[i]][m] = pick->inputs[i];
    out_p[m] = pick->output;
    if (bias >= 0) {
      // The bias follows the output: a matching shard, Replicate where it broadcasts, and
      // Partial (kept on one rank of the group) when the output is Partial.
      const auto& b = specs[bias];
      Placement bp = Placement::replicate();
      if (pick->output.is_partial()) {
        bp = Placement::partial();
      } else if (pick->output.is_shard()) {
        const int64_t D = pick->output.dim, di = D - (static_cast<int64_t>(out.size()) - b.ndim());
        if (di >= 0 && b.shape[di] != 1) bp = Placement::shard(di);
      }
      st.inputs[bias][m] = bp;
    }
  }
  st.outputs = {out_p};
  return st;
}

}  // namespace

void register_matmul_rules() {
  register_rule("aten::mm", [](const OpCall& c) { return einsum(c, "mk,kn->mn", {0, 1}, -1); });
  register_rule("aten::bmm", [](const OpCall& c) { return einsum(c, "bmk,bkn->bmn", {0, 1}, -1); });
  register_rule("aten::addmm", [](const OpCall& c) { return einsum(c, "mk,kn->mn", {1, 2}, 0); });
  register_rule("aten::baddbmm", [](const OpCall& c) {
    return einsum(c, "bmk,bkn->bmn", {1, 2}, 0);
  });
}

}  // namespace vescale::dtensor
