// Internal to models/: the part of ModelOptions every family's options share (its type, the
// typed access), over the family's options struct T.
#pragma once
#include <string>
#include <typeinfo>
#include <utility>

#include "vescale/models/registry.h"
#include "vescale/common/json_schema.h"

namespace vescale::models {

template <class T>
class OptionsImpl : public ModelOptions {
 public:
  OptionsImpl(std::string type, T value) : value(std::move(value)), type_(std::move(type)) {}
  const std::string& type() const override { return type_; }
  T value;

 protected:
  const void* get(const std::type_info& t) const override {
    return t == typeid(T) ? &value : nullptr;
  }

 private:
  std::string type_;
};

// "must be >= 1, got 0" for a size field.
inline void check_positive(const ModelOptions::Fail& fail, const std::string& field, int64_t v) {
  if (v < 1) fail(field, "must be >= 1, got " + std::to_string(v));
}

}  // namespace vescale::models
