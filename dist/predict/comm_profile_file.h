#pragma once
// Reading a communication profile back: the JSON that `mintrain profile-comm --out FILE` writes
// (comm_profile_json), for `mintrain model --comm-profile FILE` to predict with.

#include <string>

#include "dist/predict/cost_model.h"
#include "dist/predict/dssync_comm_profile.h"

namespace mt::dist {

struct MeasuredComm {
  int world = 0;           // ranks it was measured on (>= 2)
  std::string group;       // e.g. "gloo/tcp world of 4"
  LinearCost cost;   // the ring allreduce on `world` ranks: alpha, beta (> 0); gamma; the
                           // mean time per size of "bytes"/"seconds" as its measured curve, and
                           // of "idle_bytes"/"idle_seconds" as its after-idle curve
  DsSyncCommProfile dssync;  // "dssync", when present (group_size 0: absent); partitions
                                   // are not read back, only which ones cross racks
};

// `named_by` is the flag or field that named the file (for errors). Errors name the file and
// what is wrong, and say how to measure a new one.
MeasuredComm read_comm_profile(const std::string& path, const std::string& named_by = "--comm-profile");

}  // namespace mt::dist
