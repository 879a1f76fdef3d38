#include "run_settings.h"

#include "compute_settings.h"
#include "drafter_family_setting.h"
#include "run_context.h"

namespace dflash::train {

RunDevices parse_run_devices(const TrainConfig& cfg) {
  RunDevices d;
  d.drafter = ops::devices_of(cfg.drafter_devices, "train config: 'drafter_devices'");
  d.target = models::device_layout_of(cfg.target_devices, "train config: 'target_devices'");
  check_target_and_drafter_apart(d.target, d.drafter, cfg.target_devices.text, cfg.drafter_devices.text);
  return d;
}

RunDevices validate_run_settings(TrainConfig& cfg, const std::string& command) {
  resolve_drafter_family(cfg, command);  // first: validate() reads the family's settings
  cfg.validate();
  return parse_run_devices(cfg);
}

}  // namespace dflash::train
