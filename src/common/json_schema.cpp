#include "vescale/common/json_schema.h"

#include <algorithm>

#include "vescale/common/check.h"
#include "vescale/common/suggest.h"

namespace vescale::json_schema {

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

json parse(const std::string& text, const std::string& what, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    VESCALE_FAIL(what, " '", source, "': not valid JSON: ", e.what());
  }
}

std::string short_dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

std::string a_type(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

Reader::Reader(const json& node, std::string path, const std::string& source, std::string what)
    : node_(node), path_(std::move(path)), source_(source), what_(std::move(what)) {
  if (!node_.is_object())
    fail_here("expected an object (a section), not " + a_type(node_) + " (" + short_dump(node_) +
              ")");
}

void Reader::field(const char* k, int64_t& out) {
  if (const json* v = raw(k)) {
    if (!v->is_number_integer())
      fail(k, "expected an integer, not " + a_type(*v) + " (" + short_dump(*v) + ")");
    out = v->get<int64_t>();
  }
}

void Reader::field(const char* k, uint64_t& out) {
  if (const json* v = raw(k)) {
    if (!v->is_number_unsigned()) fail(k, "expected a non-negative integer, not " + short_dump(*v));
    out = v->get<uint64_t>();
  }
}

void Reader::field(const char* k, double& out) {
  if (const json* v = raw(k)) {
    if (!v->is_number())
      fail(k, "expected a number, not " + a_type(*v) + " (" + short_dump(*v) + ")");
    out = v->get<double>();
  }
}

void Reader::field(const char* k, NumberOrAuto& out) {
  if (const json* v = raw(k)) {
    if (v->is_string() && v->get<std::string>() == "auto") {
      out = NumberOrAuto{};
    } else if (v->is_number()) {
      out = NumberOrAuto{false, v->get<double>()};
    } else {
      fail(k, "expected a number or \"auto\", not " + a_type(*v) + " (" + short_dump(*v) + ")");
    }
  }
}

void Reader::field(const char* k, bool& out) {
  if (const json* v = raw(k)) {
    if (!v->is_boolean())
      fail(k, "expected true or false, not " + a_type(*v) + " (" + short_dump(*v) + ")");
    out = v->get<bool>();
  }
}

void Reader::field(const char* k, std::string& out) {
  if (const json* v = raw(k)) {
    if (!v->is_string())
      fail(k, "expected a string, not " + a_type(*v) + " (" + short_dump(*v) + ")");
    out = v->get<std::string>();
  }
}

void Reader::field(const char* k, std::vector<double>& out) {
  if (const json* v = raw(k)) {
    bool ok = v->is_array();
    for (size_t i = 0; ok && i < v->size(); ++i) ok = (*v)[i].is_number();
    if (!ok) fail(k, "expected an array of numbers, not " + short_dump(*v));
    out = v->get<std::vector<double>>();
  }
}

void Reader::field(const char* k, std::vector<std::string>& out) {
  if (const json* v = raw(k)) {
    if (v->is_string()) {
      out = {v->get<std::string>()};
      return;
    }
    bool ok = v->is_array();
    for (size_t i = 0; ok && i < v->size(); ++i) ok = (*v)[i].is_string();
    if (!ok) fail(k, "expected a string or an array of strings, not " + short_dump(*v));
    out = v->get<std::vector<std::string>>();
  }
}

void Reader::field(const char* k, IntMap& out) {
  if (const json* v = raw(k)) {
    if (!v->is_object() || v->empty())
      fail(k, "expected an object of mesh dims like {\"dp\": 2, \"tp\": 2}, not " + short_dump(*v));
    out.clear();
    for (auto& [name, size] : v->items()) {
      if (!size.is_number_integer())
        fail(std::string(k) + "." + name,
             "expected an integer (a mesh dim size, or -1 to infer it), not " + a_type(size) +
                 " (" + short_dump(size) + ")");
      out.emplace_back(name, size.get<int64_t>());
    }
  }
}

const json* Reader::raw(const char* k) {
  known_.emplace_back(k);
  auto it = node_.find(k);
  return it == node_.end() ? nullptr : &*it;
}

void Reader::finish() const {
  for (auto& [k, v] : node_.items()) {
    if (std::find(known_.begin(), known_.end(), k) != known_.end()) continue;
    std::string msg = "unknown key" + context_;
    const std::string guess = closest_match(k, known_);
    msg += guess.empty() ? "; known keys: " + join(known_) : "; did you mean " + key(guess) + "?";
    fail(k, msg);
  }
}

std::string origin_of(const std::map<std::string, std::string>* origins, const std::string& key,
                      const std::string& file) {
  for (std::string k = key; origins && !k.empty();) {
    if (auto it = origins->find(k); it != origins->end()) return it->second;
    const size_t dot = k.rfind('.');
    k = dot == std::string::npos ? "" : k.substr(0, dot);
  }
  return file;
}

std::string Reader::origin(const std::string& full_key) const {
  return origin_of(origins_, full_key, what_ + " '" + source_ + "'");
}

void Reader::fail(const std::string& k, const std::string& msg) const {
  VESCALE_FAIL(origin(key(k)), ": ", key(k), ": ", msg);
}

void Reader::fail_here(const std::string& msg) const {
  VESCALE_FAIL(what_, " '", source_, "': ", path_.empty() ? "top level" : path_, ": ", msg);
}

void Writer::field(const char* k, const NumberOrAuto& v) {
  if (v.is_auto)
    node[k] = "auto";
  else
    node[k] = v.value;
}

void Writer::field(const char* k, const IntMap& map) {
  json m = json::object();
  for (auto& [name, size] : map) m[name] = size;
  node[k] = m;
}

void Writer::fail(const std::string& k, const std::string& msg) const {
  VESCALE_FAIL(k, ": ", msg);
}

}  // namespace vescale::json_schema
