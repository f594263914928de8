/* SPDX-License-Identifier: BSD-3-Clause */
/* What the files of lib/control share beyond phub_control.h. */

#ifndef PHUB_CONTROL_PRIV_H
#define PHUB_CONTROL_PRIV_H

#include "phub_control.h"

/* One line of log through ops->log (nothing when it is NULL). */
void control_log(struct phub_control *ctl, enum phub_control_log_level level, const char *fmt,
		...) __attribute__((format(printf, 3, 4)));
const struct phub_control_params *control_params(const struct phub_control *ctl);
uint64_t control_now_ns(const struct phub_control *ctl);

#endif /* PHUB_CONTROL_PRIV_H */
