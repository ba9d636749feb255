"""Where a release's state is kept: the home's layout and permissions, the partition dataset of a period's
encoded trips, staging and the atomic publication of a release directory, and the free space a release
needs once it is charged."""
