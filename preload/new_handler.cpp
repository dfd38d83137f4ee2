// SPDX-License-Identifier: MIT
//
// The one piece of the shim that must be C++: nothrow operator new has to
// catch what a new-handler throws.  The C++ runtime symbols this needs are
// weak, so the shim loads without libstdc++ in C programs; a handler can only
// exist when libstdc++ is there.

extern "C" bool tfa_call_new_handler_nothrow(void (*h)());

__asm__(".weak __cxa_begin_catch\n"
	".weak __cxa_end_catch\n"
	".weak __gxx_personality_v0\n"
	".weak _Unwind_Resume\n");

extern "C" bool
tfa_call_new_handler_nothrow(void (*h)())
{
	try {
		h();
	} catch (...) {
		return false;
	}
	return true;
}
