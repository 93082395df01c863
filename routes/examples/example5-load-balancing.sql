-- Spec §2, Example 5: two databases host the same service (load balancing).
--   AW -> BalancedService, no broker instance: M3 picks one broker instance per conversation, so
--       conversations are spread over server1 and server2 (C5); after the first acknowledgement
--       the conversation is pinned to the database that answered (A2, then M1)
--   AW -> BalancedService, broker instance 5fb8d92b-...: M1 -> BalancedRouteOne (server1)
--   AW -> BalancedService, broker instance 81b1d3d0-...: M1 -> BalancedRouteTwo (server2)
--   anything else: AutoCreatedLocal, as in Example 2
--
-- AW is the docs' AdventureWorks2008R2. SQL Server creates AutoCreatedLocal in every user database
-- and msdb (R8); the router has no implicit routes, so the script creates them.

USE AW;
GO

CREATE ROUTE AutoCreatedLocal WITH ADDRESS = 'LOCAL';

CREATE ROUTE BalancedRouteOne
    WITH SERVICE_NAME = 'BalancedService',
         BROKER_INSTANCE = '5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d',
         ADDRESS = 'tcp://server1.Adventure-Works.com:4022/';

CREATE ROUTE BalancedRouteTwo
    WITH SERVICE_NAME = 'BalancedService',
         BROKER_INSTANCE = '81b1d3d0-288e-4d2c-b1d3-456cbb944b4f',
         ADDRESS = 'tcp://server2.Adventure-Works.com:4022/';
GO

USE msdb;
GO

CREATE ROUTE AutoCreatedLocal WITH ADDRESS = 'LOCAL';
GO
