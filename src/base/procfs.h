/* One number from a /proc text file (a line like "procs_running 3" or
 * "MemAvailable:  123 kB"). */
#ifndef KC_PROCFS_H
#define KC_PROCFS_H

/* The value the sscanf `format` (one %ld) matches on the first line it
 * matches in path, or -1 when none does or the file cannot be read. */
long kc_proc_value(const char *path, const char *format);

#endif
