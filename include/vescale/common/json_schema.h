// Reading JSON files against a schema written once as visit() functions (the train config,
// plans): a Reader visitor parses and checks a section's fields, a Writer visitor prints them
// back. Every error names the file, the key's full path and the fix; an unknown key gets the
// closest known one ("train.stpes: unknown key; did you mean train.steps?"). Library-internal
// (it exposes nlohmann::json); installed for completeness.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "vescale/common/number_or_auto.h"

namespace vescale::json_schema {

using json = nlohmann::ordered_json;
using IntMap = std::vector<std::pair<std::string, int64_t>>;  // {"dp": 2, "tp": 2}, in order

// `text` as JSON; throws "<what> '<source>': not valid JSON: ..." (what: "config", "plan", ...).
json parse(const std::string& text, const std::string& what, const std::string& source);

// A value for messages, cut to 40 characters; never throws on bad UTF-8.
std::string short_dump(const json& v);
// "an integer", "a string", ... for messages.
std::string a_type(const json& v);

// Where the value at `key` (a dotted path) came from: the entry of `origins` (path -> "--set
// k=v") for it or a section above it, else `file` ("config 't.json'").
std::string origin_of(const std::map<std::string, std::string>* origins, const std::string& key,
                      const std::string& file);

class Reader {
 public:
  // `what` and `source` name the file in messages ("config 't.json': ..."); `path` is this
  // section's key path ("" at the top level).
  Reader(const json& node, std::string path, const std::string& source,
         std::string what = "config");

  // A note for unknown-key messages of this section (model: "for model.type 'gpt'").
  void set_context(std::string c) { context_ = std::move(c); }
  // Where values came from other than the file: key path -> "--set train.steps=-5", which then
  // names the value in messages instead of the file. Sub-sections share it; must outlive them.
  void set_origins(const std::map<std::string, std::string>* origins) { origins_ = origins; }
  // "config 't.json'", or the --set that gave key path `full_key`.
  std::string origin(const std::string& full_key) const;

  // Each reads key `k` into `out` when present (else leaves the default), checking its type.
  void field(const char* k, int64_t& out);
  void field(const char* k, uint64_t& out);
  void field(const char* k, double& out);
  void field(const char* k, NumberOrAuto& out);  // a number or "auto"
  void field(const char* k, bool& out);
  void field(const char* k, std::string& out);
  void field(const char* k, std::vector<double>& out);
  void field(const char* k, std::vector<std::string>& out);  // a string or an array of them
  void field(const char* k, IntMap& out);                    // mesh dims: an object of integers
  // A sub-section, read by read(Reader&) and then checked for unknown keys.
  template <class F>
  void object(const char* k, F&& read) {
    if (const json* v = raw(k)) {
      Reader sub(*v, key(k), source_, what_);
      sub.set_origins(origins_);
      read(sub);
      sub.finish();
    }
  }
  // Key `k` as it is, for sections with a shape of their own (a plan's pattern maps), or null.
  // Marks it known.
  const json* raw(const char* k);

  // Every key of this section must have been asked for.
  void finish() const;

  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  [[noreturn]] void fail(const std::string& k, const std::string& msg) const;

 private:
  [[noreturn]] void fail_here(const std::string& msg) const;

  const json& node_;
  std::string path_;
  const std::string& source_;
  std::string what_;
  std::vector<std::string> known_;
  std::string context_;
  const std::map<std::string, std::string>* origins_ = nullptr;
};

class Writer {
 public:
  template <class T>
  void field(const char* k, const T& v) {
    node[k] = v;
  }
  void field(const char* k, const IntMap& map);
  void field(const char* k, const NumberOrAuto& v);
  template <class F>
  void object(const char* k, F&& write) {
    Writer sub;
    write(sub);
    node[k] = sub.node;
  }
  void set_context(const std::string&) {}
  [[noreturn]] void fail(const std::string& k, const std::string& msg) const;
  json node = json::object();
};

}  // namespace vescale::json_schema
