// FlexPipe's own lossless schedule file: placement, pipelines, custom kinds and every device's
// actions in cell form. Documented in docs/schedule-json.md ("format": "flexpipe-schedule", "version": 1).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "flexpipe/ir/schedule.h"

namespace flexpipe {

nlohmann::json schedule_to_json(const Schedule& schedule);
// schedule_to_json as file text: fields in documented order, one line per device and per custom kind.
std::string write_schedule_json(const Schedule& schedule);
// Errors name origin (and line:column for JSON syntax errors, the device and cell index otherwise).
Schedule schedule_from_json(const nlohmann::json& json, const std::string& origin);
Schedule parse_schedule_json(const std::string& text, const std::string& origin);

// Parses one action cell in our extended cell form, resolving custom names against `schedule`.
// Returns false and sets `error` on failure.
bool parse_action_cell(const std::string& cell, const Schedule& schedule, Action& action, std::string& error);

}  // namespace flexpipe
