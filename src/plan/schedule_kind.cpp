#include "vescale/plan/schedule_kind.h"

#include "vescale/common/check.h"
#include "vescale/common/suggest.h"

namespace vescale::plan {

const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved1F1B: return "interleaved_1f1b";
    case ScheduleKind::ZeroBubbleH1: return "zb_h1";
  }
  return "?";
}

const std::vector<ScheduleKind>& schedule_kinds() {
  static const std::vector<ScheduleKind> kinds = {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                                  ScheduleKind::Interleaved1F1B,
                                                  ScheduleKind::ZeroBubbleH1};
  return kinds;
}

std::optional<ScheduleKind> schedule_kind_named(const std::string& name) {
  for (ScheduleKind k : schedule_kinds())
    if (name == to_string(k)) return k;
  return std::nullopt;
}

std::string unknown_schedule_kind(const std::string& name) {
  std::vector<std::string> names;
  for (ScheduleKind k : schedule_kinds()) names.push_back(to_string(k));
  const std::string near = closest_match(name, names);
  return detail::cat("unknown schedule kind '", name, "'",
                     near.empty() ? "" : " (did you mean '" + near + "'?)",
                     "; set pipeline.schedule to gpipe, 1f1b, interleaved_1f1b or zb_h1");
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  const auto k = schedule_kind_named(name);
  VESCALE_CHECK(k, unknown_schedule_kind(name));
  return *k;
}

}  // namespace vescale::plan
