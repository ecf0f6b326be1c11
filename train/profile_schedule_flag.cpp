#include "tapegrad/train/profile_schedule_flag.h"

#include <sstream>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/strict_numbers.h"
#include "tapegrad/train/config.h"

namespace tg::train {

ProfileSchedule parse_profile_schedule(const std::string& text, const std::string& flag) {
  std::vector<std::string> fields;
  std::istringstream in(text);
  for (std::string field; std::getline(in, field, ',');) fields.push_back(field);
  if (!text.empty() && text.back() == ',') fields.emplace_back();  // "1,2,3," has an empty 4th
  TG_CHECK(fields.size() == 3 || fields.size() == 4, flag, ": '", text,
           "' is not wait,warmup,active or wait,warmup,active,repeat (e.g. 1,1,3)");
  const std::string what = flag + " (wait,warmup,active[,repeat])";
  std::vector<int64_t> values;
  for (const std::string& field : fields) {
    const int64_t value = parse_int64(field, what.c_str());
    TG_CHECK(value >= 0 && value <= Limits::steps, flag, ": '", text, "': each number must be in [0, ",
             Limits::steps, "], got ", value);
    values.push_back(value);
  }
  ProfileSchedule schedule{.wait = values[0], .warmup = values[1], .active = values[2],
                           .repeat = values.size() == 4 ? values[3] : 1};
  TG_CHECK(schedule.active >= 1, flag, ": '", text, "': active must be at least 1 step");
  return schedule;
}

}  // namespace tg::train
