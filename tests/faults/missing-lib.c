/* Linked against libppgone.so, which is nowhere on its library path at run
 * time: the dynamic loader refuses to start it, as it would a worker built
 * against a library this host lacks. */
int pp_gone_value (void);

int
main (void)
{
  return pp_gone_value ();
}
