/* Measure each stage's worker for the split planner (speed, memory, link). */
#ifndef KC_CALIBRATE_H
#define KC_CALIBRATE_H

#include "net/pipeline.h"
#include "net/planner.h"

kc_status kc_plan_calibrate(const kc_pipeline_options *o, kc_plan_worker *workers);

#endif
