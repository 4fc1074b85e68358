/* The library missing-lib-worker needs and never finds at run time. */
int pp_gone_value (void);

int
pp_gone_value (void)
{
  return 0;
}
