/* SPDX-License-Identifier: MIT */
/* Does nothing: the baseline of a C program that allocates nothing itself. */
int
main(void)
{
	return 0;
}
