#include "vescale/plan/plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "vescale/common/check.h"
#include "vescale/common/json_schema.h"
#include "vescale/common/suggest.h"

namespace vescale::plan {

using dtensor::Placement;
using dtensor::Placements;
using json = json_schema::json;

// ---- matching ------------------------------------------------------------------------

namespace {

// Glob with *, ? and [..] classes; iterative with backtracking on the last *.
bool glob(const std::string& p, const std::string& s) {
  size_t pi = 0, si = 0, star_p = std::string::npos, star_s = 0;
  auto class_match = [&](size_t& i, char c) {  // p[i] == '['; advances i past ']'
    size_t j = i + 1;
    bool neg = j < p.size() && (p[j] == '!' || p[j] == '^');
    if (neg) ++j;
    bool hit = false;
    for (; j < p.size() && p[j] != ']'; ++j) {
      if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
        hit |= p[j] <= c && c <= p[j + 2];
        j += 2;
      } else {
        hit |= p[j] == c;
      }
    }
    i = j + 1;
    return hit != neg;
  };
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_s = si;
      continue;
    }
    if (pi < p.size()) {
      size_t next = pi;
      bool ok = false;
      if (p[pi] == '?')
        ok = true, next = pi + 1;
      else if (p[pi] == '[')
        ok = class_match(next, s[si]);
      else
        ok = p[pi] == s[si], next = pi + 1;
      if (ok) {
        pi = next;
        ++si;
        continue;
      }
    }
    if (star_p == std::string::npos) return false;
    pi = star_p + 1;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

// A "re:" pattern as a std::regex, refusing what could crash or stall std::regex: its
// compiler recurses once per term (a long pattern overflows the stack), counted repeats copy
// the automaton ({1000}{1000} is a million states), and libstdc++'s default (backtracking)
// matcher recurses once per input character and takes exponential time on (a*)*b. FQN
// regexes are short, so we cap the pattern and the automaton size, and match in libstdc++'s
// polynomial (breadth-first) mode, which has no back-references.
constexpr size_t kMaxRegexLength = 512, kMaxRegexStates = 4096;

std::regex compile_fqn_regex(const std::string& pattern) {
  const std::string body = pattern.substr(3);
  VESCALE_CHECK(body.size() <= kMaxRegexLength, "pattern '", pattern.substr(0, 80), "...' is ",
                body.size(), " characters long; regex patterns are limited to ", kMaxRegexLength,
                "; split it into several patterns or use a glob");
  // An upper bound of the automaton size: the length times the product of the repeat
  // counts. Every {..} counts, in a class too, so the bound never falls short.
  size_t size = std::max<size_t>(body.size(), 1);
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '\\' && i + 1 < body.size()) {
      // libstdc++ reads \<digits> into a long without an overflow check (UB on 20 digits).
      VESCALE_CHECK(
          !std::isdigit(static_cast<unsigned char>(body[i + 1])), "pattern '", pattern,
          "': back-references (\\1) are not supported in regex patterns; spell the text out");
      ++i;
    } else if (body[i] == '{') {
      size_t count = 0, num = 0;  // {m,n} makes up to max(m, n) + 1 copies
      for (++i; i < body.size() && body[i] != '}'; ++i) {
        num = std::isdigit(static_cast<unsigned char>(body[i]))
                  ? std::min<size_t>(num * 10 + (body[i] - '0'), kMaxRegexStates)
                  : 0;
        count = std::max(count, num);
      }
      size = std::min<size_t>(size * (count + 1), kMaxRegexStates + 1);
    }
  }
  VESCALE_CHECK(size <= kMaxRegexStates, "pattern '", pattern,
                "': its repeat counts are too large (the regex "
                "could need ",
                size, "+ states, at most ", kMaxRegexStates, " are allowed); use * or + instead");
  auto flags = std::regex::ECMAScript;
#if defined(__GLIBCXX__)
  flags |= std::regex_constants::__polynomial;
#endif
  try {
    return std::regex(body, flags);
  } catch (const std::regex_error& e) {
    VESCALE_FAIL("pattern '", pattern,
                 "' is not a valid regex (ECMAScript, no back-references): ", e.what());
  }
}

}  // namespace

bool fqn_match(const std::string& pattern, const std::string& fqn) {
  if (pattern.rfind("re:", 0) == 0) return std::regex_match(fqn, compile_fqn_regex(pattern));
  return glob(pattern, fqn);
}

// ---- JSON ----------------------------------------------------------------------------

namespace {

std::string where(const std::string& source, const std::string& key) {
  return "plan '" + source + "': " + key;
}

Placements parse_placements(const json& v, const std::string& source, const std::string& key) {
  VESCALE_CHECK(v.is_array(), where(source, key),
                " must be a list of placements, one per mesh dim, like "
                "[\"Replicate\", \"Shard(0)\"]");
  Placements out;
  for (size_t i = 0; i < v.size(); ++i) {
    VESCALE_CHECK(v[i].is_string(), where(source, key), "[", i,
                  "] must be a string like \"Shard(0)\"");
    try {
      out.push_back(Placement::parse(v[i].get<std::string>()));
    } catch (const Error& e) {
      VESCALE_FAIL(where(source, key), "[", i, "]: ", e.what());
    }
  }
  return out;
}

std::vector<Placements> parse_placement_list(const json& v, const std::string& source,
                                             const std::string& key) {
  VESCALE_CHECK(v.is_array(), where(source, key),
                " must be a list with one placement list per tensor");
  std::vector<Placements> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(parse_placements(v[i], source, key + "[" + std::to_string(i) + "]"));
  return out;
}

void check_regex(const std::string& pattern, const std::string& source, const std::string& key) {
  if (pattern.rfind("re:", 0) != 0) return;
  try {
    compile_fqn_regex(pattern);
  } catch (const Error& e) {
    VESCALE_FAIL(where(source, key), ": ", e.what());
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (auto x : shape) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "[" + s + "]";
}

// A name with its numeric path parts as '*' ("layers.3.wq" -> "layers.*.wq"): what a pattern
// for it usually looks like, so the nearest one makes a good "did you mean".
std::string generalized(const std::string& name) {
  std::string out, part;
  std::stringstream ss(name);
  while (std::getline(ss, part, '.')) {
    const bool number = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    out += (out.empty() ? "" : ".") + (number ? std::string("*") : part);
  }
  return out;
}

// Every pattern of `patterns` must match one of `names`, unless the plan lists it as optional.
void check_all_match(const std::string& source, const std::string& section, const char* what,
                     const std::vector<std::string>& patterns,
                     const std::set<std::string>& optional, const std::vector<std::string>& names) {
  for (const auto& pattern : patterns) {
    if (optional.count(pattern)) continue;
    const bool any = std::any_of(names.begin(), names.end(),
                                 [&](const std::string& n) { return fqn_match(pattern, n); });
    if (any) continue;
    std::vector<std::string> candidates;
    for (const auto& n : names) {
      candidates.push_back(n);
      candidates.push_back(generalized(n));
    }
    const std::string guess = closest_match(pattern, candidates);
    VESCALE_FAIL("plan '", source, "': ", section, "['", pattern, "'] matches no ", what,
                 " of the model",
                 guess.empty() ? std::string(".") : "; did you mean '" + guess + "'?",
                 " Fix the pattern, or list it under \"optional\" if the plan is meant for models "
                 "without it");
  }
}

}  // namespace

Plan Plan::from_json(const std::string& text, const std::string& source) {
  const json j = json_schema::parse(text, "plan", source);
  VESCALE_CHECK(j.is_object(), "plan '", source,
                "': the top level must be an object with \"mesh\" and \"params\"");
  Plan plan;
  plan.source_ = source;
  // The sections: pattern maps taken as they are, grad_reduce read field by field; any other
  // key is an error with the closest known one suggested.
  json_schema::Reader r(j, "", source, "plan");
  const json* mesh = r.raw("mesh");
  const json* params = r.raw("params");
  const json* forward = r.raw("forward");
  const json* phase = r.raw("phase");
  const json* optional = r.raw("optional");
  const json* zero = r.raw("zero");
  const json* moe = r.raw("moe");
  r.raw("comment");
  r.object("grad_reduce", [&](json_schema::Reader& g) {
    g.field("dims", plan.grad_reduce_.dims);
    g.field("bucket_mb", plan.grad_reduce_.bucket_mb);
    if (!(plan.grad_reduce_.bucket_mb > 0))
      g.fail("bucket_mb", "must be a positive number (MiB per bucket)");
    g.field("fused", plan.grad_reduce_.fused);
  });
  r.object("pipeline", [&](json_schema::Reader& g) {
    PipelineSpec p;
    g.field("dim", p.dim);
    std::string schedule = to_string(p.schedule);
    g.field("schedule", schedule);
    const auto kind = schedule_kind_named(schedule);
    if (!kind) g.fail("schedule", unknown_schedule_kind(schedule));
    p.schedule = *kind;
    g.field("microbatches", p.microbatches);
    g.field("chunks", p.chunks);
    g.field("stages", p.stages);
    g.field("split", p.split);
    if (p.microbatches < 1)
      g.fail("microbatches", "must be set to the micro-batches per step (at least the pipeline size)");
    if (p.chunks < 1) g.fail("chunks", "must be at least 1 (stages per pipeline rank)");
    if (p.split != "even") g.fail("split", "must be \"even\" (or list the cuts in \"stages\")");
    plan.pipeline_ = std::move(p);
  });
  r.object("context", [&](json_schema::Reader& g) {
    ContextSpec c;
    g.field("dim", c.dim);
    std::string attention = to_string(c.attention), balance = c.zigzag ? "zigzag" : "none";
    g.field("attention", attention);
    const auto kind = context_attention_named(attention);
    if (!kind) g.fail("attention", "must be \"ring\" or \"allgather\", not \"" + attention + "\"");
    c.attention = *kind;
    g.field("balance", balance);
    if (balance != "zigzag" && balance != "none")
      g.fail("balance", "must be \"zigzag\" (2cp chunks, equal causal work) or \"none\", not \"" +
                            balance + "\"");
    c.zigzag = balance == "zigzag";
    if (c.dim.empty()) g.fail("dim", "must name the mesh dim that splits sequences (\"cp\")");
    plan.context_ = std::move(c);
  });
  r.finish();
  // A pipeline plan's mesh lists the stage's dims: none at all for a pure pipeline.
  const bool pure_pipeline = plan.pipeline_ && mesh && mesh->is_array() && mesh->empty();
  VESCALE_CHECK(mesh && mesh->is_array() && (!mesh->empty() || pure_pipeline), where(source, "mesh"),
                " must be a non-empty list of mesh dim names, like [\"dp\", \"tp\"]");
  for (auto& d : *mesh) {
    VESCALE_CHECK(d.is_string() && !d.get<std::string>().empty(), where(source, "mesh"),
                  " must hold dim names (strings)");
    plan.mesh_dims_.push_back(d.get<std::string>());
  }
  // The pipeline and context dims shard no parameter: the plan's mesh does not list them.
  auto unlisted = [&](const std::string& dim, const char* why) {
    VESCALE_CHECK(
        std::find(plan.mesh_dims_.begin(), plan.mesh_dims_.end(), dim) == plan.mesh_dims_.end(),
        where(source, "mesh"), " lists '", dim, "', ", why);
  };
  if (plan.pipeline_)
    unlisted(plan.pipeline_->dim,
             "the pipeline dim: list only the stage's dims (the pipeline cuts layers, it shards "
             "no parameter)");
  if (plan.context_)
    unlisted(plan.context_->dim,
             "the context dim: list the model's dims, with the context dim joined to dp (it "
             "splits sequences and shards no parameter; docs/context_parallel.md)");
  VESCALE_CHECK((pure_pipeline && !params) || (params && params->is_object()), where(source, "params"),
                " must be an object mapping FQN patterns to placements");
  static const json no_params = json::object();
  for (auto& [pattern, v] : (params ? *params : no_params).items()) {
    const std::string key = "params['" + pattern + "']";
    check_regex(pattern, source, key);
    auto p = parse_placements(v, source, key);
    VESCALE_CHECK(p.size() == plan.mesh_dims_.size(), where(source, key), " has ", p.size(),
                  " placements for a mesh of ", plan.mesh_dims_.size(),
                  " dims; give one per mesh dim");
    plan.params_.emplace_back(pattern, std::move(p));
  }
  if (forward) {
    VESCALE_CHECK(forward->is_object(), where(source, "forward"),
                  " must be an object mapping module patterns "
                  "to {\"input\": [...], \"output\": [...]}");
    for (auto& [pattern, v] : forward->items()) {
      const std::string key = "forward['" + pattern + "']";
      check_regex(pattern, source, key);
      VESCALE_CHECK(v.is_object(), where(source, key),
                    " must be an object with \"input\" and/or \"output\"");
      ForwardSpec f;
      for (auto& [k, x] : v.items()) {
        VESCALE_CHECK(k == "input" || k == "output", where(source, key), ": key '", k,
                      "' is unknown; use input or output");
        (k == "input" ? f.input : f.output) = parse_placement_list(x, source, key + "." + k);
        for (auto& p : (k == "input" ? f.input : f.output))
          VESCALE_CHECK(p.size() == plan.mesh_dims_.size(), where(source, key + "." + k),
                        " has a list of ", p.size(), " placements for a mesh of ",
                        plan.mesh_dims_.size(), " dims");
      }
      plan.forwards_.emplace_back(pattern, std::move(f));
    }
  }
  if (phase) {
    VESCALE_CHECK(phase->is_object(), where(source, "phase"),
                  " must be an object mapping FQN patterns to "
                  "\"after_sharding\" or \"before_sharding\"");
    for (auto& [pattern, v] : phase->items()) {
      const std::string key = "phase['" + pattern + "']";
      check_regex(pattern, source, key);
      const std::string text = v.is_string() ? v.get<std::string>() : "";
      VESCALE_CHECK(text == "after_sharding" || text == "before_sharding", where(source, key),
                    " must be \"after_sharding\" (the model's init reruns on the shards) or "
                    "\"before_sharding\" "
                    "(keep the values the parameter holds, e.g. loaded weights)");
      plan.phases_.emplace_back(
          pattern, text == "after_sharding" ? InitPhase::AfterSharding : InitPhase::BeforeSharding);
    }
  }
  if (optional) {
    const auto& o = *optional;
    VESCALE_CHECK(o.is_array(), where(source, "optional"),
                  " must be a list of the params, forward or phase patterns "
                  "that may match nothing (e.g. [\"output.weight\"])");
    for (auto& x : o) {
      VESCALE_CHECK(x.is_string(), where(source, "optional"), " must hold pattern strings");
      plan.optional_.insert(x.get<std::string>());
    }
  }
  if (moe) {
    VESCALE_CHECK(moe->is_object(), where(source, "moe"),
                  " must be an object mapping experts-module patterns to {\"ep\": \"<mesh dim>\"}, "
                  "like {\"layers.*.feed_forward.experts\": {\"ep\": \"ep\"}}");
    for (auto& [pattern, v] : moe->items()) {
      const std::string key = "moe['" + pattern + "']";
      check_regex(pattern, source, key);
      json_schema::Reader m(v, key, source, "plan");
      MoESpec spec;
      m.field("ep", spec.ep);
      m.finish();
      VESCALE_CHECK(spec.ep.empty() || std::find(plan.mesh_dims_.begin(), plan.mesh_dims_.end(),
                                                 spec.ep) != plan.mesh_dims_.end(),
                    where(source, key + ".ep"), " names '", spec.ep,
                    "', which is not one of the plan's mesh dims; add it to \"mesh\" or fix the name");
      plan.moes_.emplace_back(pattern, std::move(spec));
    }
  }
  if (zero) {
    // Compared as int64: get<int>() would wrap 4294967297 to 1.
    const auto& z = *zero;
    VESCALE_CHECK(z.is_number_integer() && z.get<int64_t>() >= 0 && z.get<int64_t>() <= 3,
                  where(source, "zero"), " must be 0, 1, 2 or 3");
    plan.zero_ = static_cast<int>(z.get<int64_t>());
  }
  return plan;
}

Plan Plan::from_json_file(const std::string& path) {
  VESCALE_CHECK(
      !std::filesystem::is_directory(path), "plan: '", path,
      "' is a directory; parallel.plan must name a plan file, like configs/plans/llama_tp.json");
  std::ifstream f(path);
  VESCALE_CHECK(f.good(), "plan: cannot open '", path,
                "'; check the path (parallel.plan in the config)");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json(ss.str(), path);
}

// ---- builder and lookups -------------------------------------------------------------

Plan& Plan::pipeline(PipelineSpec spec) {
  pipeline_ = std::move(spec);
  return *this;
}

ContextSpec context_of(const Plan* plan) {
  return plan && plan->context() ? *plan->context() : ContextSpec{};
}

Plan& Plan::context(ContextSpec spec) {
  context_ = std::move(spec);
  return *this;
}

Plan& Plan::phase(const std::string& pattern, InitPhase phase) {
  phases_.emplace_back(pattern, phase);
  return *this;
}

InitPhase Plan::phase_for(const std::string& fqn) const {
  for (const auto& [pattern, phase] : phases_)
    if (fqn_match(pattern, fqn)) return phase;
  return InitPhase::AfterSharding;
}

Plan& Plan::shard(const std::string& pattern, Placements placements) {
  check_regex(pattern, source_, "shard('" + pattern + "')");
  params_.emplace_back(pattern, std::move(placements));
  return *this;
}

Plan& Plan::optional(const std::string& pattern) {
  optional_.insert(pattern);
  return *this;
}

Plan& Plan::forward(const std::string& module_pattern, ForwardSpec spec) {
  check_regex(module_pattern, source_, "forward('" + module_pattern + "')");
  forwards_.emplace_back(module_pattern, std::move(spec));
  return *this;
}

const Placements& Plan::placements_for(const std::string& fqn) const {
  for (auto& [pattern, p] : params_)
    if (fqn_match(pattern, fqn)) return p;
  VESCALE_FAIL("plan '", source_, "': parameter '", fqn,
               "' matches no pattern; add one, or a '*' default");
}

Plan& Plan::moe(const std::string& module_pattern, MoESpec spec) {
  check_regex(module_pattern, source_, "moe('" + module_pattern + "')");
  moes_.emplace_back(module_pattern, std::move(spec));
  return *this;
}

const MoESpec* Plan::moe_for(const std::string& module_fqn) const {
  for (auto& [pattern, m] : moes_)
    if (fqn_match(pattern, module_fqn)) return &m;
  return nullptr;
}

const ForwardSpec* Plan::forward_for(const std::string& module_fqn) const {
  for (auto& [pattern, f] : forwards_)
    if (fqn_match(pattern, module_fqn)) return &f;
  return nullptr;
}

std::map<std::string, Placements> Plan::resolve(
    const std::vector<std::string>& mesh_dims,
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& params) const {
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return "[" + s + "]";
  };
  for (auto& d : mesh_dims_)
    VESCALE_CHECK(std::find(mesh_dims.begin(), mesh_dims.end(), d) != mesh_dims.end(), "plan '",
                  source_, "': mesh dim '", d, "' is not in the mesh ", list(mesh_dims),
                  "; rename it or change parallel.mesh");
  VESCALE_CHECK(mesh_dims_ == mesh_dims, "plan '", source_, "': its mesh ", list(mesh_dims_),
                " must list the mesh's dims ", list(mesh_dims), " in the same order");
  for (auto& d : grad_reduce_.dims)
    VESCALE_CHECK(std::find(mesh_dims.begin(), mesh_dims.end(), d) != mesh_dims.end(), "plan '",
                  source_, "': grad_reduce.dims names '", d, "', which is not in the mesh ",
                  list(mesh_dims));
  std::vector<std::string> names, param_patterns, phase_patterns;
  for (auto& [fqn, shape] : params) names.push_back(fqn);
  for (auto& [pattern, p] : params_) param_patterns.push_back(pattern);
  for (auto& [pattern, p] : phases_) phase_patterns.push_back(pattern);
  std::map<std::string, Placements> out;
  for (auto& [fqn, shape] : params) {
    Placements p = placements_for(fqn);
    VESCALE_CHECK(p.size() == mesh_dims.size(), "plan '", source_, "': parameter '", fqn, "' gets ",
                  p.size(), " placements for a mesh of ", mesh_dims.size(), " dims");
    const int64_t nd = static_cast<int64_t>(shape.size());
    for (auto& x : p) {
      VESCALE_CHECK(!x.is_partial(), "plan '", source_, "': parameter '", fqn,
                    "' cannot be Partial; parameters are "
                    "Shard or Replicate");
      if (!x.is_shard()) continue;
      VESCALE_CHECK(x.dim >= -nd && x.dim < nd, "plan '", source_, "': parameter '", fqn, "' has ",
                    nd, " dims (shape ", shape_string(shape), ") but its pattern shards dim ",
                    x.dim);
      if (x.dim < 0) x.dim += nd;
    }
    out.emplace(fqn, std::move(p));
  }
  check_all_match(source_, "params", "parameter", param_patterns, optional_, names);
  check_all_match(source_, "phase", "parameter", phase_patterns, optional_, names);
  return out;
}

void Plan::check_modules(const std::vector<std::string>& module_names) const {
  std::vector<std::string> patterns;
  for (auto& [pattern, f] : forwards_) patterns.push_back(pattern);
  check_all_match(source_, "forward", "module", patterns, optional_, module_names);
  patterns.clear();
  for (auto& [pattern, m] : moes_) patterns.push_back(pattern);
  check_all_match(source_, "moe", "module", patterns, optional_, module_names);
}

}  // namespace vescale::plan
