/* The dmutex command: one binary, a few verbs (dmutex run | ls | scan | acl).
 * Each verb is a function taking the arguments after the verb name
 * (argv[0] is the verb) and returning the process exit status. */
#ifndef DM_CLI_H
#define DM_CLI_H

int dm_cli_run(int argc, char **argv);     /* tools/dmutex.c */
int dm_cli_ls(int argc, char **argv);      /* tools/ls.c */
int dm_cli_scan(int argc, char **argv);    /* tools/scan.c */
int dm_cli_acl(int argc, char **argv);     /* tools/acl.c */

#endif
