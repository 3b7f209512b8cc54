// gradient_compression(spec): the built-in hooks by name.
#include "dist/distribute/gradient_compression.h"

#include <cstdlib>

#include "dist/core/error.h"

namespace dist {
namespace {

// A whole non-negative decimal number, or nullopt.
bool parse_count(const std::string& text, int64_t* value) {
  if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *value = std::stoll(text);
  return true;
}

}  // namespace

std::shared_ptr<CommunicationHook> gradient_compression(const std::string& spec) {
  if (spec == "none") return nullptr;
  if (spec == "bf16") return bf16_compression();
  if (spec == "fp16") return fp16_compression();
  const std::string forms = "none, bf16, fp16, powersgd:RANK or powersgd:RANK:START_STEP";
  const std::string prefix = "powersgd:";
  DIST_CHECK_ARG(spec.rfind(prefix, 0) == 0, "unknown gradient compression '", spec,
                 "': use one of ", forms);
  const std::string rest = spec.substr(prefix.size());
  const size_t colon = rest.find(':');
  PowerSgdOptions options;
  int64_t rank = 0;
  int64_t start = options.start_step;
  const bool valid = parse_count(rest.substr(0, colon), &rank) && rank >= 1 && rank <= 1024 &&
                     (colon == std::string::npos || parse_count(rest.substr(colon + 1), &start));
  DIST_CHECK_ARG(valid, "gradient compression '", spec,
                 "': RANK must be a whole number from 1 to 1024 and START_STEP one from 0 (", forms,
                 ")");
  options.rank = static_cast<int>(rank);
  options.start_step = start;
  return powersgd(options);
}

}  // namespace dist
