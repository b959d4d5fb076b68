"""guardd: the Agent Action Guard HTTP service."""
