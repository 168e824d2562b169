// The pipeline schedule kinds a plan names (docs/pipeline.md); parallel/pipeline/schedule.h
// writes each kind's action lists. Plain C++, so that schedules stay pure data.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace vescale::plan {

// How a pipeline orders its micro-batches (parallel/pipeline/schedule.h writes the lists).
enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1 };
// "gpipe", "1f1b", "interleaved_1f1b", "zb_h1": the names plans and messages use.
const char* to_string(ScheduleKind k);
const std::vector<ScheduleKind>& schedule_kinds();  // in the order above
// The kind named `name`; throws vescale::Error "unknown schedule kind '1fb1' (did you mean
// '1f1b'?); set pipeline.schedule to gpipe, 1f1b, interleaved_1f1b or zb_h1".
ScheduleKind parse_schedule_kind(const std::string& name);
// The same lookup without throwing, and the message it throws, for readers that add context.
std::optional<ScheduleKind> schedule_kind_named(const std::string& name);
std::string unknown_schedule_kind(const std::string& name);

}  // namespace vescale::plan
